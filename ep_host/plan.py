"""The execution plan: a placed graph as a frozen list of steps over numbered value slots.

Every value gets a slot per device and layout it lives in; a step is a kernel (over one node, or a
group of nodes), a device copy or a layout conversion, with its input and output slots, the slots
that die after it and the dtypes and shapes its outputs must have. A plan is built once per
(sub)graph and never changed by running it; ``ep_host.runloop`` defines what running a step means.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ep_host.cost import element_count
from ep_host.device_graphs import CapturedPartition, PartitionCapture, why_not
from ep_host.errors import (
    KernelError,
    ModelValidationError,
    ResourceLimitError,
    describe_exception,
)
from ep_host.graph import GraphView, NodeView, ValueView, laid_out
from ep_host.inferred_shapes import shapes_inference_gets_wrong
from ep_host.kernel import Kernel
from ep_host.layouts import (
    conversion_axes,
    conversion_cost_us,
    converted_shape,
    has_layouts,
    input_layout,
    output_layout,
    shown,
)
from ep_host.partitions import Group, compiling_groups, execution_order, partition_view, readers
from ep_host.placement import Placement
from ep_host.plugin_calls import is_user_interrupt, provider_fault, sigint
from ep_host.prepacked import (
    SHARED_CONSTANT_BYTES,
    PrepackedContainer,
    PrepackedUse,
    SharedState,
    offer_prepacked,
)
from ep_host.provider import HOST, Device
from ep_host.released import WeightFreeing
from ep_host.runloop import CompiledSteps, StepChecks, array_kind, read_only
from ep_host.transfers import implied_transfers
from ep_host.workspaces import allocate_workspace, asked_workspace

if TYPE_CHECKING:
    from ep_host.subgraph import PartitionView
    from ep_host.tracing import Tracer

_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, eq=False, slots=True)
class Step:
    """One step of a plan: a kernel computing ``nodes`` on ``provider``, a device copy, or a
    layout conversion (a kernel of the host's, on the device of ``provider``, its consumer).

    ``inputs``/``outputs``: value slots (``-1`` for an omitted optional value); ``expect``: per
    output, the numpy dtype, shape (``None`` where unknown) and array kind the kernel must
    return; ``output_names``: the values the outputs are;
    ``scope``: (outer name, slot) pairs a node's bodies read; ``workspace``: (slot, bytes) of the
    scratch memory the kernel asked for, passed as ``workspace=`` (bytes 0: the whole slot, a
    session workspace; else the first bytes of the run's arena); ``copy``: (source, destination)
    devices of a copy step; ``lock``: set when the kernel is not thread-safe; ``span``: the trace
    span's arguments (what placement estimated).
    """

    name: str
    op: str
    kind: str  # "node", "partition", "copy" or "layout"
    nodes: tuple[Any, ...]
    kernel: Kernel | None
    provider: str | None
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    expect: tuple[tuple[Any, Any], ...] = ()
    scope: tuple[tuple[str, int], ...] = ()
    copy: tuple[Device, Device] | None = None
    lock: Any = None
    span: Mapping[str, Any] = field(default_factory=dict)
    output_names: tuple[str, ...] = ()
    workspace: tuple[int, int] | None = None

    @property
    def subject(self) -> str:
        """How messages name the step: ``node 'conv1'``, ``partition '...'``."""
        return f"{self.kind} {self.name!r}"

    @property
    def node(self) -> NodeView | None:
        """The node of a one-node step (``None`` for copies and partitions)."""
        return self.nodes[0] if self.kind == "node" else None


@dataclass(frozen=True, eq=False)
class Plan:
    """A placed graph ready to run: its steps, slots, constants and outputs.

    ``releases[i]``: the slots that die after step ``i`` (no later step reads them).
    ``placement`` is the placement the kernels were made for (a kernel that failed to build moves
    its node to the next claimant, in a new placement value). ``outer_slots``: values read from an
    enclosing graph (a control-flow body's outer scope). ``keep``: slots that are never freed or
    written into (inputs, constants, outputs). ``device_graphs``: what became of each device
    partition whose provider asked for device graphs. ``prepacked``: with ``share_prepacked``,
    each state a kernel offered (see :class:`PrepackedUse`); ``shared_constants``: the holders of
    the constants shared by contents; holding them keeps them alive. ``arenas``: per device, the
    slot of the per-run workspace arena and its size (the largest ``"run"`` workspace a kernel on
    the device asked for); each run takes an arena of its own. ``released``: the weights whose
    memory was given back once their kernels packed them (:mod:`ep_host.released`).
    """

    label: str
    graph_name: str
    placement: Placement
    steps: tuple[Step, ...]
    releases: tuple[tuple[int, ...], ...]
    n_slots: int
    input_slots: Mapping[str, int]
    outer_slots: Mapping[str, int]
    output_names: tuple[str, ...]
    output_slots: Mapping[str, int]
    constants: Mapping[int, Any]
    keep: frozenset[int]
    device_graphs: tuple[PartitionCapture, ...] = ()
    prepacked: tuple[PrepackedUse, ...] = ()
    shared_constants: tuple[SharedState, ...] = ()
    arenas: Mapping[int, tuple[Device, int]] = field(default_factory=dict)
    released: tuple[tuple[str, int], ...] = ()  # weights freed after packing: (name, bytes)


class KernelSource(Protocol):
    """What building a plan needs from the session: kernels, devices and its settings."""

    checks: StepChecks
    tracer: Tracer | None
    max_tensor_bytes: int | None
    prepacked: PrepackedContainer | None  # the container when the session shares, else None
    frees_constants: bool  # whether released weights may be freed (see ep_host.released)

    def create_kernel(self, node: NodeView, provider: str, placement: Placement) -> Kernel: ...

    def device(self, provider: str) -> Device: ...

    def wants_device_graph(self, provider: str) -> bool: ...

    def compiling(self) -> set[str]: ...

    def compile_partition(self, partition: PartitionView, placement: Placement) -> Kernel: ...

    @property
    def strict(self) -> bool: ...


class NodeSpan(Mapping[str, Any]):
    """A node step's trace-span arguments (``op_type``, ``provider``, ``device``, ``bytes``,
    ``flops``, ``estimated_us``), read from its node and cost when asked: a dict per step would
    cost about 300 bytes per node of a long model."""

    __slots__ = ("_node", "_provider", "_device", "_cost")
    KEYS = ("op_type", "provider", "device", "bytes", "flops", "estimated_us")

    def __init__(self, node: NodeView, provider: str, device: str, cost: Any):
        self._node, self._provider, self._device, self._cost = node, provider, device, cost

    def __getitem__(self, key: str) -> Any:
        if key == "op_type":
            return self._node.qualified_op
        if key == "provider":
            return self._provider
        if key == "device":
            return self._device
        if key == "bytes":
            return self._cost.bytes_moved
        if key == "flops":
            return self._cost.flops
        if key == "estimated_us":
            return self._cost.total_us
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.KEYS)

    def __len__(self) -> int:
        return len(self.KEYS)


def expected_output(value: ValueView | None,
                    device: Device = HOST) -> tuple[Any, tuple[int | None, ...] | None, Any]:
    """The numpy dtype, shape (``None`` for dims not known statically) and array kind
    (:func:`~ep_host.runloop.array_kind`) a kernel on ``device`` must return for ``value``, as
    far as loading inferred them."""
    if value is None:
        return None, None, None
    kind = array_kind(device, value.kind)
    if value.kind != "tensor" or value.dtype is None:
        return None, None, kind
    dtype = value.dtype.numpy
    if dtype is None or np.dtype(dtype).kind in "OUS":
        dtype = None  # strings: kernels may return object or unicode arrays
    shape = None if value.shape is None else tuple(
        d if isinstance(d, int) else None for d in value.shape)
    return dtype, shape, kind


def _loosened(expect: tuple[Any, Any, Any], rank: bool) -> tuple[Any, Any, Any]:
    dtype, shape, kind = expect
    if rank or shape is None:
        return dtype, None, kind
    return dtype, (None,) * len(shape), kind


def captured_names(node: NodeView) -> set[str]:
    """Outer-scope names the bodies of ``node`` read."""
    out: set[str] = set()
    for sub in node.subgraphs.values():
        out |= sub.outer_names()
    return out


def reassigned(placement: Placement, node: str, provider: str) -> Placement:
    """``placement`` with ``node`` on ``provider`` and the device copies that implies."""
    cost = placement.table.answers[node][provider].cost.total_us
    nodes = [replace(n, provider=provider, cost_us=cost) if n.name == node else n
             for n in placement.nodes]
    moved = replace(placement, nodes=nodes, transfers=[])
    moved.transfers = implied_transfers(moved)
    return moved


def build_plan(source: KernelSource, graph: GraphView, placement: Placement, *, label: str,
               outer: Iterable[str] = (), body: bool = False) -> Plan:
    """Create every kernel of ``graph`` as ``placement`` says and lay out the steps.

    ``outer``: names the graph reads from an enclosing graph; ``body``: a control-flow body
    (its steps are never recorded as device graphs)."""
    return _Builder(source, graph, placement, label, body).build(sorted(set(outer)))


class _Builder:
    def __init__(self, source: KernelSource, graph: GraphView, placement: Placement, label: str,
                 body: bool):
        self.source = source
        self.graph = graph
        self.placement = placement
        self.label = label
        self.body = body
        self.slots: dict[tuple[str, str, str | None], int] = {}  # (value, device, layout) -> slot
        self.constants: dict[int, Any] = {}
        # value -> the device its producer runs on and the layout it writes the value in
        self.home: dict[str, tuple[Device, str | None]] = {}
        self.steps: list[Step] = []
        self.device_graphs: list[PartitionCapture] = []
        self.partitions = 0  # partitions compiled so far, for their names
        self.freeing = WeightFreeing(graph.model, graph, placement.table.nodes, label) if (
            source.frees_constants and not body) else None
        self.wrong_dims, self.wrong_rank = shapes_inference_gets_wrong(placement.table.nodes)
        self.expects: dict[tuple[Any, ...], tuple[tuple[Any, Any, Any], ...]] = {}
        self.prepacked: list[PrepackedUse] = []
        self.held_constants: list[SharedState] = []  # constants shared by contents
        self.arenas: dict[str, list[Any]] = {}  # device name -> [slot, device, bytes]
        self.identities: dict[str, tuple[str, tuple[int, ...], str]] = {}  # constant -> content

    def expect(self, value: ValueView | None, device: Device) -> tuple[Any, Any, Any]:
        expect = expected_output(value, device)
        if value is None or value.name not in self.wrong_dims and value.name not in (
                self.wrong_rank):
            return expect
        return _loosened(expect, rank=value.name in self.wrong_rank)

    def slot(self, name: str, device: Device, layout: str | None = None) -> int:
        key = (name, device.name, layout)
        if key not in self.slots:
            self.slots[key] = len(self.slots)
        return self.slots[key]

    def fetch(self, value: ValueView, device: Device, layout: str | None = None,
              provider: str | None = None) -> int:
        """The slot holding ``value`` on ``device`` in ``layout`` (``None``: the model's),
        adding a copy step, a layout conversion (on ``device``, for ``provider``) or both the
        first time."""
        key = (value.name, device.name, layout)
        if key in self.slots:
            return self.slots[key]
        if value.is_constant and value.name not in self.home:
            container = getattr(self.source, "prepacked", None)
            key = None
            if layout is None and container is not None and (
                    value.nbytes >= SHARED_CONSTANT_BYTES):
                key = (device.name, "constant", self.identity(value))
                held = container.get(key)
                if held is not None:  # another session's copy of equal contents
                    s = self.slot(value.name, device)
                    self.constants[s] = held.state
                    self.held_constants.append(held)
                    if device.is_host:  # the model's own copy is freed
                        self.graph.model.hold_constant(value, held.state)
                    return s
            data = value.value  # the host's own errors (bad raw data) pass as they are
            if layout is not None:  # converted once, here, like the upload
                axes = conversion_axes(None, layout, data.ndim)
                data = np.ascontiguousarray(np.transpose(data, axes))
            s = self.constant(value, device, layout, data)
            if key is not None:
                held, _ = container.share(key, self.constants[s])
                self.constants[s] = held.state
                self.held_constants.append(held)
            return s
        src, src_layout = self.home[value.name]
        if src_layout != layout:
            return self.convert(value, device, src_layout, layout, provider)
        src_slot = self.slots[(value.name, src.name, layout)]
        dst_slot = self.slot(value.name, device, layout)
        self.steps.append(Step(f"copy {value.name}", "copy", "copy", (), None, None,
                               (src_slot,), (dst_slot,), copy=(src, device)))
        return dst_slot

    def convert(self, value: ValueView, device: Device, source: str | None,
                destination: str | None, provider: str | None) -> int:
        """A step converting ``value`` from layout ``source`` to ``destination`` on
        ``device`` (copied there first in ``source`` when it lives elsewhere)."""
        src_slot = self.fetch(value, device, source, provider)
        dst_slot = self.slot(value.name, device, destination)
        rank = value.rank
        axes = conversion_axes(source, destination, rank)
        change = f"{shown(source, rank)}->{shown(destination, rank)}"
        dtype, shape, kind = self.expect(value, device)
        expect = (dtype, converted_shape(shape, destination), kind)
        span = {"tensor": value.name, "layouts": change, "device": device.name,
                "bytes": value.nbytes, "estimated_us": conversion_cost_us(value.nbytes)}
        self.steps.append(Step(f"layout {value.name} {change}", change, "layout", (),
                               LayoutConversion(axes), provider, (src_slot,), (dst_slot,),
                               expect=(expect,), span=MappingProxyType(span),
                               output_names=(value.name,)))
        return dst_slot

    def constant(self, value: ValueView, device: Device, layout: str | None, data: Any) -> int:
        """The slot of constant ``value`` on ``device`` in ``layout``, uploaded once."""
        s = self.slot(value.name, device, layout)
        since = sigint.received
        try:
            constant = device.upload(data)
        except BaseException as exc:  # the device's from_host is provider code
            if is_user_interrupt(exc, since):
                raise
            raise KernelError(f"{self.label}: device {device.name} failed to take constant "
                              f"{value.name!r}: {describe_exception(exc)}") from exc
        # no kernel may change a constant for the next run, or for another session
        self.constants[s] = read_only(constant) if constant.__class__ is np.ndarray else (
            constant)
        return s

    def build(self, outer: list[str]) -> Plan:
        graph = self.graph
        input_slots = {v.name: self.slot(v.name, HOST) for v in graph.inputs}
        outer_slots = {name: self.slot(name, HOST) for name in outer}
        for name in (*input_slots, *outer_slots):
            self.home[name] = (HOST, None)
        where = {n.name: n.provider for n in self.placement.nodes}
        # a node whose values are known at load (a Constant) has no step: consumers read them
        nodes = [n for n in self.placement.table.nodes
                 if not (n.outputs and all(v is None or v.is_constant for v in n.outputs))]
        compiling = set() if self.body else self.source.compiling()
        if compiling:
            groups = compiling_groups(nodes, where, compiling)
            read_by = readers(self.placement.table.nodes, graph)
            for unit in execution_order(nodes, groups):
                if isinstance(unit, Group):
                    self.steps.extend(self.partition_steps(unit, read_by))
                else:
                    self.steps.append(self.node_step(unit, where[unit.name]))
        else:
            for node in nodes:
                self.steps.append(self.node_step(node, where[node.name]))
        output_slots = {}
        for v in graph.outputs:
            if v.name not in self.home and not v.is_constant:
                raise ModelValidationError(
                    f"{self.label}: graph output {v.name!r} of graph {graph.name!r} is never "
                    "computed")
            output_slots[v.name] = self.fetch(v, HOST)
        keep = frozenset({*self.constants, *output_slots.values(), *input_slots.values(),
                          *outer_slots.values(), *(a[0] for a in self.arenas.values())})
        steps = self.steps if self.body else self.record_partitions(keep)
        return Plan(
            label=self.label, graph_name=graph.name, placement=self.placement,
            steps=tuple(steps), releases=release_points(steps, keep), n_slots=len(self.slots),
            input_slots=MappingProxyType(input_slots),
            outer_slots=MappingProxyType(outer_slots),
            output_names=tuple(v.name for v in graph.outputs),
            output_slots=MappingProxyType(output_slots),
            constants=MappingProxyType(self.constants), keep=keep,
            device_graphs=tuple(self.device_graphs), prepacked=tuple(self.prepacked),
            shared_constants=tuple(self.held_constants),
            arenas=MappingProxyType({a[0]: (a[1], a[2]) for a in self.arenas.values()}),
            released=tuple(self.freeing.freed) if self.freeing is not None else ())

    def node_step(self, node: NodeView, provider: str) -> Step:
        kernel, provider = self.kernel(node, provider)
        device = self.source.device(provider)
        answer = self.placement.table.answers[node.name][provider]
        host_inputs = set(answer.host_inputs)
        in_slots = []
        constants = {}
        for i, value in enumerate(node.inputs):
            if value is None:
                in_slots.append(-1)
                continue
            s = self.fetch(value, HOST if i in host_inputs else device, input_layout(answer, i),
                           provider)
            in_slots.append(s)
            if s in self.constants:
                constants[i] = self.constants[s]
        scope: tuple[tuple[str, int], ...] = ()
        if node.has_subgraphs:
            scope = tuple((n, self.fetch(self.graph.values[n], HOST))
                          for n in sorted(captured_names(node)))
        with provider_fault(self.label, provider, f"prepare the kernel for node {node.name!r}"):
            kernel.prepare(constants)
        container = getattr(self.source, "prepacked", None)
        if container is not None and type(kernel).prepacked is not Kernel.prepacked and constants:
            self.share_prepacked(container, kernel, node, provider, device)
        if self.freeing is not None and self.freeing.left and constants:
            self.freeing.prepared(node, kernel, provider, in_slots, self.slots, self.constants)
        workspace, own = self.workspace(kernel, node, provider, device)
        out_slots = []
        layouts = [output_layout(answer, k) for k in range(len(node.outputs))]
        for value, layout in zip(node.outputs, layouts, strict=True):
            if value is None:
                out_slots.append(-1)
                continue
            self.check_static_size(node, value)
            out_slots.append(self.slot(value.name, device, layout))
            self.home[value.name] = (device, layout)
        expect = self.expected(node.outputs, device)
        if any(layouts):
            expect = tuple((dtype, converted_shape(shape, layout), kind)
                           for (dtype, shape, kind), layout in zip(expect, layouts, strict=True))
        return Step(node.name, node.qualified_op, "node", (node,), kernel, provider,
                    tuple(in_slots), tuple(out_slots),
                    expect=expect, scope=scope,
                    lock=None if kernel.thread_safe and not own else threading.Lock(),
                    workspace=workspace,
                    span=NodeSpan(node, provider, device.name, answer.cost),
                    output_names=tuple(v.name if v is not None else "" for v in node.outputs))

    def share_prepacked(self, container: PrepackedContainer, kernel: Kernel, node: NodeView,
                        provider: str, device: Device) -> None:
        """Offer each state ``kernel`` built from constants; adopt equal ones shared before."""
        self.prepacked.extend(offer_prepacked(container, kernel, node, provider, device.name,
                                              self.identity, self.label))

    def workspace(self, kernel: Kernel, node: NodeView, provider: str,
                  device: Device) -> tuple[tuple[int, int] | None, bool]:
        """The step's ``workspace`` (slot, bytes) for what ``kernel`` asks, and whether it is
        the kernel's own: a session workspace, allocated here, whose calls are serialised. A
        per-run request only raises its device's arena size: each run takes an arena."""
        asked = asked_workspace(kernel, node, provider, self.label,
                                self.source.max_tensor_bytes)
        if asked is None or asked.nbytes == 0 or (device.empty is None and not device.is_host):
            return None, False  # nothing to give, or a device that gives no workspaces
        # a device graph replays fixed addresses: its kernels keep their workspace
        recorded = not self.body and self.source.wants_device_graph(provider)
        if asked.lifetime == "session" or recorded:
            s = self.slot(f"\0workspace of {node.name}", device)  # no value has such a name
            self.constants[s] = allocate_workspace(device, asked.nbytes, node, self.label)
            return (s, 0), True
        arena = self.arenas.get(device.name)
        if arena is None:
            arena = self.arenas[device.name] = [self.slot(f"\0arena of {device.name}", device),
                                                device, 0]
        arena[2] = max(arena[2], asked.nbytes)
        return (arena[0], asked.nbytes), False

    def identity(self, value: ValueView) -> tuple[str, tuple[int, ...], str]:
        """A constant's content identity, worked out once per constant of the plan."""
        found = self.identities.get(value.name)
        if found is None:
            found = self.identities[value.name] = self.graph.model.constant_identity(value)
        return found

    def expected(self, values: Sequence[ValueView | None],
                 device: Device) -> tuple[tuple[Any, Any, Any], ...]:
        """``expect`` of each value, one tuple shared by the steps on one device whose outputs
        have equal types (a long model repeats a few)."""
        if any(v is not None and (v.name in self.wrong_dims or v.name in self.wrong_rank)
               for v in values):
            return tuple(self.expect(v, device) for v in values)
        key = (device.name,
               tuple(None if v is None else (v.kind, v.dtype, v.shape) for v in values))
        try:
            known = self.expects.get(key)
        except TypeError:  # a shape or dtype that cannot be hashed
            return tuple(self.expect(v, device) for v in values)
        if known is None:
            known = self.expects[key] = tuple(self.expect(v, device) for v in values)
        return known

    def partition_steps(self, group: Group, read_by: Mapping[str, set[str]]) -> list[Step]:
        """The group as one step with the kernel its provider compiled; when the compile fails,
        a warning and the group's nodes one by one (``EP_HOST_STRICT``: the error)."""
        provider = group.provider
        answers = self.placement.table.answers
        if any(has_layouts(answers[n.name][provider]) for n in group.nodes):
            # a partition's kernel reads and writes the model's layout: where its nodes asked for
            # others, they run one by one, converted as they asked
            return [self.node_step(n, provider) for n in group.nodes]
        self.partitions += 1
        view = partition_view(group, f"{provider} partition {self.partitions}", read_by)
        try:
            kernel = self.source.compile_partition(view, self.placement)
        except KernelError as exc:
            if self.source.strict:
                raise
            self.source.checks.warnings.append(
                f"{exc}; its {len(group.nodes)} node(s) are created one by one")
            return [self.node_step(n, provider) for n in group.nodes]
        device = self.source.device(provider)
        in_slots = tuple(self.fetch(v, device) for v in view.inputs)
        with provider_fault(self.label, provider,
                            f"prepare the kernel of partition {view.name!r}"):
            kernel.prepare({})
        out_slots = []
        for value in view.outputs:
            self.check_static_size(group.nodes[0], value)
            out_slots.append(self.slot(value.name, device))
            self.home[value.name] = (device, None)
        answers = self.placement.table.answers
        costs = [answers[n.name][provider].cost for n in group.nodes]
        op = f"partition of {len(group.nodes)} nodes"
        span = {"op_type": op, "provider": provider, "device": device.name,
                "nodes": ", ".join(n.name for n in group.nodes),
                "bytes": sum(c.bytes_moved for c in costs), "flops": sum(c.flops for c in costs),
                "estimated_us": sum(c.total_us for c in costs)}
        return [Step(view.name, op, "partition", group.nodes, kernel, provider, in_slots,
                     tuple(out_slots),
                     expect=tuple(self.expect(v, device) for v in view.outputs),
                     lock=None if kernel.thread_safe else threading.Lock(),
                     span=MappingProxyType(span),
                     output_names=tuple(v.name for v in view.outputs))]

    def kernel(self, node: NodeView, provider: str) -> tuple[Kernel, str]:
        """The kernel for ``node`` from ``provider``; when that fails, from the next provider
        that claimed it (the plan's placement becomes a new value with the node moved). With no
        other claimant the failure is raised; when every claimant fails, a KernelError lists
        them all."""
        answers = self.placement.table.answers[node.name]
        try:
            return self.source.create_kernel(laid_out(node, answers[provider]), provider,
                                             self.placement), provider
        except KernelError as first:
            failures = [str(first)]
            for other in self.placement.table.claimants(node.name):
                if other == provider:
                    continue
                try:
                    kernel = self.source.create_kernel(laid_out(node, answers[other]), other,
                                                       self.placement)
                except KernelError as exc:
                    failures.append(str(exc))
                    continue
                self.placement = reassigned(self.placement, node.name, other)
                self.source.checks.warnings.append(
                    f"{failures[0]}; node {node.name!r} runs on {other!r} instead")
                return kernel, other
            if len(failures) == 1:
                raise
            raise KernelError(
                f"{self.label}: no provider that claims node {node.name!r} could create its "
                "kernel:\n  " + "\n  ".join(failures)) from first

    def check_static_size(self, node: NodeView, value: ValueView) -> None:
        """Refuse, before any run allocates it, an output whose static size overflows int64 or
        exceeds the session's ``max_tensor_bytes``."""
        if value.dtype is None or not value.is_static:
            return
        count = element_count(value.shape)
        if count > _INT64_MAX:
            raise ResourceLimitError(
                f"{self.label}: output {value.name!r} of node {node.name!r} has shape "
                f"{list(value.shape)}, whose element count overflows int64")
        limit = self.source.max_tensor_bytes
        nbytes = value.dtype.storage_bytes(count)
        if limit is not None and nbytes > limit:
            raise ResourceLimitError(
                f"{self.label}: output {value.name!r} of node {node.name!r} would take {nbytes} "
                f"bytes (shape {list(value.shape)}), over the limit of {limit} "
                "(max_tensor_bytes / EP_HOST_MAX_TENSOR_BYTES)")

    # -- device graphs ------------------------------------------------------------------------

    def record_partitions(self, keep: frozenset[int]) -> list[Step]:
        """Runs of consecutive node steps on one device whose provider asks for device graphs
        become one step that records them once and replays them; each run's outcome (recorded,
        or why not) goes to ``device_graphs``."""
        steps, source = self.steps, self.source

        def wants(step: Step) -> bool:
            return (step.kind == "node" and not source.device(step.provider).is_host
                    and source.wants_device_graph(step.provider))

        # each slot's device and value, read once for all partitions
        where = {s: device for (_, device, _), s in self.slots.items()}
        names = {s: name for (name, _, _), s in self.slots.items()}
        out: list[Step] = []
        i = 0
        while i < len(steps):
            if not wants(steps[i]):
                out.append(steps[i])
                i += 1
                continue
            j = i
            while j < len(steps) and wants(steps[j]) and steps[j].provider == steps[i].provider:
                j += 1
            out.extend(self.partition(steps[i:j], steps[j:], keep, where, names))
            i = j
        return out

    def partition(self, part: list[Step], later: list[Step], keep: frozenset[int],
                  where: Mapping[int, str], names: Mapping[int, str]) -> list[Step]:
        """``part`` as one recording step, or unchanged (with the reason) when it cannot be."""
        provider = part[0].provider
        device = self.source.device(provider)
        report = PartitionCapture(provider, device.name, [s.name for s in part])
        self.device_graphs.append(report)
        produced = {s for step in part for s in step.outputs if s >= 0}
        reads = [s for step in part
                 for s in (*step.inputs, *(step.workspace[:1] if step.workspace else ()))
                 if s >= 0 and s not in produced]
        inputs = list(dict.fromkeys(s for s in reads if s not in self.constants))
        reason = why_not(part, device)
        if not reason:
            host_read = [s for s in inputs if where[s] == HOST.name]
            if host_read:
                reason = f"reads host value {names[host_read[0]]!r} at run time"
        if reason:
            report.reason = reason
            return part
        needed = {s for step in later for s in (*step.inputs, *(o for _, o in step.scope))}
        outputs = [s for step in part for s in step.outputs
                   if s >= 0 and (s in needed or s in keep)]
        constants = {s: self.constants[s] for s in reads if s in self.constants}
        computed = [s for step in part for s in step.outputs if s >= 0]
        # every value stays alive and nothing is written in place: a replay reuses the memory
        record = CompiledSteps(part, inputs, constants, computed, frozenset(self.slots),
                               self.source.checks)
        kernel = CapturedPartition(record, device, inputs, computed, outputs)
        name = f"device graph {len(self.device_graphs)} on {provider}"
        views = [self.graph.values.get(names[s]) for s in outputs]
        report.captured = True
        span = {"op_type": f"device graph of {len(part)} nodes", "provider": provider,
                "device": device.name,
                **{k: sum(s.span[k] for s in part) for k in ("bytes", "flops", "estimated_us")}}
        return [Step(name, f"device graph of {len(part)} nodes", "partition",
                     tuple(n for s in part for n in s.nodes), kernel, provider,
                     tuple(inputs), tuple(outputs),
                     expect=tuple(self.expect(v, device) for v in views),
                     lock=threading.Lock(), span=MappingProxyType(span),
                     output_names=tuple(names[s] for s in outputs))]


class LayoutConversion(Kernel):
    """The host's kernel for a layout conversion: the array transposed by ``axes``, made
    contiguous, with the array's own methods (numpy's and CuPy's alike), on its device."""

    def __init__(self, axes: tuple[int, ...]):
        self.axes = axes
        self.call = self.convert

    def convert(self, array: Any) -> Any:
        return array.transpose(self.axes).copy()

    def run(self, *inputs: Any) -> Sequence[Any]:
        return (self.convert(inputs[0]),)

    def __repr__(self) -> str:
        return f"LayoutConversion{self.axes}"


def release_points(steps: Sequence[Step], keep: frozenset[int]) -> tuple[tuple[int, ...], ...]:
    """Per step, the slots to free right after it: those it reads or writes last, but ``keep``."""
    last_use: dict[int, int] = {}
    for i, step in enumerate(steps):
        for s in (*step.inputs, *step.outputs, *(s for _, s in step.scope)):
            if s >= 0:
                last_use[s] = i
    frees: dict[int, list[int]] = {}
    for s, i in last_use.items():
        if s not in keep:
            frees.setdefault(i, []).append(s)
    return tuple(tuple(frees.get(i, ())) for i in range(len(steps)))
