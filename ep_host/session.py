"""Sessions: place a model, create each kernel once, and run it like onnxruntime does.

At creation the placed graph becomes a flat plan: every value gets a slot, every step names its
kernel, its input and output slots and the slots it frees, and device copies are steps too.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ep_host import capability
from ep_host.device_graphs import OPTION as GRAPH_OPTION
from ep_host.device_graphs import CapturedPartition, PartitionCapture, PartitionNode, why_not
from ep_host.discovery import Host
from ep_host.errors import (
    HostError,
    InputError,
    KernelError,
    ModelValidationError,
    ResourceLimitError,
    RunCancelledError,
    describe_exception,
)
from ep_host.graph import GraphView, NodeView, ValueView, _captured
from ep_host.kernel import Kernel
from ep_host.loading import Model, load_model
from ep_host.optimize import optimize
from ep_host.placement import Placement, choose, implied_transfers
from ep_host.provider import HOST, Device
from ep_host.runloop import CompiledRun
from ep_host.threads import BlasThreads, default_threads
from ep_host.tracing import Tracer

ProviderOptions = Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]]

# onnxruntime's provider names, accepted wherever a provider name is.
ORT_ALIASES = {
    "CPUExecutionProvider": "cpu",
    "CUDAExecutionProvider": "cuda",
}


def provider_names(providers: Iterable[Any] | None) -> list[str] | None:
    if providers is None:
        return None
    out = []
    for p in providers:
        name = p[0] if isinstance(p, tuple) else p
        out.append(ORT_ALIASES.get(name, name))
    return out


@dataclass(frozen=True)
class NodeArg:
    """An input or output as ``get_inputs()`` lists it (onnxruntime's ``NodeArg``)."""

    name: str
    type: str
    shape: list[int | str | None] | None
    dtype: Any = None


def _node_arg(view: ValueView) -> NodeArg:
    elem = view.dtype.name if view.dtype is not None else "unknown"
    kind = "tensor" if view.kind in ("tensor", "unknown") else view.kind
    return NodeArg(view.name, f"{kind}({elem})", None if view.shape is None else list(view.shape),
                   view.dtype)


_INT64_MAX = 2**63 - 1


def max_tensor_bytes_from_env() -> int | None:
    """``EP_HOST_MAX_TENSOR_BYTES`` (no limit when unset, empty or not positive)."""
    raw = os.environ.get("EP_HOST_MAX_TENSOR_BYTES", "").strip()
    try:
        value = int(raw) if raw else 0
    except ValueError as exc:
        raise ResourceLimitError(
            f"EP_HOST_MAX_TENSOR_BYTES={raw!r} is not a whole number of bytes") from exc
    return value if value > 0 else None


class RunOptions:
    """onnxruntime's ``RunOptions``: set ``terminate = True``, from any thread, to cancel the
    runs given these options; each stops before its next step with :class:`RunCancelledError`."""

    def __init__(self) -> None:
        self.terminate = False
        self.run_tag = ""
        self.log_severity_level = 2


def _expected_output(value: ValueView | None) -> tuple[Any, tuple[int | None, ...] | None]:
    """The numpy dtype and shape (``None`` for dims not known statically) a kernel must return
    for ``value``, as far as loading inferred them."""
    if value is None or value.kind != "tensor" or value.dtype is None:
        return None, None
    dtype = value.dtype.numpy
    if dtype is None or np.dtype(dtype).kind in "OUS":
        dtype = None  # strings: kernels may return object or unicode arrays
    shape = None if value.shape is None else tuple(
        d if isinstance(d, int) else None for d in value.shape)
    return dtype, shape


class _Step:
    __slots__ = ("node", "kernel", "inputs", "outputs", "release", "lock", "provider", "copy",
                 "scope", "expect", "span")

    def __init__(self, node, kernel, inputs, outputs, provider, copy=None, scope=()):
        self.node = node
        self.kernel = kernel
        self.inputs = inputs
        self.outputs = outputs
        self.release: tuple[int, ...] = ()
        self.lock = None if kernel is None or kernel.thread_safe else threading.Lock()
        self.provider = provider
        self.copy = copy
        self.scope: tuple[tuple[str, int], ...] = scope  # outer names its bodies read
        self.expect = () if node is None else tuple(_expected_output(v) for v in node.outputs)
        self.span: dict[str, Any] | None = None  # a node's trace-span arguments, once traced


class ExecutionPlan:
    """A placed graph compiled to a flat list of steps over numbered value slots.

    ``outer`` names values the graph reads from an enclosing graph (a control-flow body's outer
    scope); they are passed to :meth:`run` in ``scope``.
    """

    def __init__(self, runtime: _Runtime, graph: GraphView, placement: Placement,
                 outer: Iterable[str] = (), body: bool = False):
        self.runtime = runtime
        tracer = runtime.tracer
        # a body's nodes are traced only at full verbosity
        self.tracer = tracer if tracer is not None and (
            not body or tracer.verbosity >= Tracer.FULL) else None
        self.graph = graph
        self.placement = placement
        self.label = runtime.model.label
        self.body = body
        self.device_graphs: list[PartitionCapture] = []
        self._build(sorted(set(outer)))

    def _build(self, outer: list[str]) -> None:
        graph, runtime = self.graph, self.runtime
        where = {n.name: n.provider for n in self.placement.nodes}
        slots: dict[tuple[str, str], int] = {}  # (value, device) -> slot
        initial: dict[int, Any] = {}
        home: dict[str, Device] = {}
        steps: list[_Step] = []

        def slot(name: str, device: Device) -> int:
            key = (name, device.name)
            if key not in slots:
                slots[key] = len(slots)
            return slots[key]

        self.input_slots = {v.name: slot(v.name, HOST) for v in graph.inputs}
        self.outer_slots = {name: slot(name, HOST) for name in outer}
        for name in (*self.input_slots, *self.outer_slots):
            home[name] = HOST

        def fetch(value: ValueView, device: Device) -> int:
            """The slot holding ``value`` on ``device``, adding a copy step the first time."""
            if (value.name, device.name) in slots:
                return slots[(value.name, device.name)]
            if value.is_constant and value.name not in home:
                s = slot(value.name, device)
                initial[s] = device.upload(value.value)
                return s
            src = home[value.name]
            src_slot = slots[(value.name, src.name)]
            dst_slot = slot(value.name, device)
            steps.append(_Step(None, None, (src_slot,), (dst_slot,), None, copy=(src, device)))
            return dst_slot

        for node in self.placement.table.nodes:
            if node.outputs and all(v is None or v.is_constant for v in node.outputs):
                continue  # a Constant node: its value is known at load, consumers read it
            kernel, provider = self._create_kernel(node, where[node.name])
            device = runtime.device(provider)
            answer = self.placement.table.answers[node.name][provider]
            host_inputs = set(answer.host_inputs)
            in_slots = []
            constants = {}
            for i, value in enumerate(node.inputs):
                if value is None:
                    in_slots.append(-1)
                    continue
                s = fetch(value, HOST if i in host_inputs else device)
                in_slots.append(s)
                if s in initial:
                    constants[i] = initial[s]
            scope = ()
            if node.has_subgraphs:
                names = sorted(captured_names(node))
                scope = tuple((n, fetch(graph.values[n], HOST)) for n in names)
            try:
                kernel.prepare(constants)
            except Exception as exc:
                raise KernelError(
                    f"{self.label}: provider {provider!r} failed to prepare the kernel "
                    f"for node {node.name!r}: {describe_exception(exc)}"
                ) from exc
            out_slots = []
            for value in node.outputs:
                if value is None:
                    out_slots.append(-1)
                    continue
                self._check_static_size(node, value)
                out_slots.append(slot(value.name, device))
                home[value.name] = device
            steps.append(_Step(node, kernel, tuple(in_slots), tuple(out_slots), provider,
                               scope=scope))

        self.output_names = [v.name for v in graph.outputs]
        self.output_slots = {}
        for v in graph.outputs:
            if v.name not in home and not v.is_constant:
                raise ModelValidationError(
                    f"{self.label}: graph output {v.name!r} of graph {graph.name!r} is never "
                    "computed")
            self.output_slots[v.name] = fetch(v, HOST)
        keep = (set(initial) | set(self.output_slots.values()) | set(self.input_slots.values())
                | set(self.outer_slots.values()))
        if not self.body:
            steps = self._record_partitions(steps, keep, initial, slots)
        _release_points(steps, keep)
        self.steps = steps
        self.n_slots = len(slots)
        self.initial = initial
        # a traced or size-limited plan always runs the step loop: nothing to compile
        self.compiled = None if self.tracer is not None or runtime.max_tensor_bytes is not None \
            else CompiledRun(steps, [*self.input_slots.values(), *self.outer_slots.values()],
                             initial, [self.output_slots[n] for n in self.output_names], keep,
                             self._check_one, lambda i, outs: self._check_count(self.steps[i],
                                                                                outs))
        self._output_index = {n: i for i, n in enumerate(self.output_names)}

    def _record_partitions(self, steps: list[_Step], keep: set[int], initial: dict[int, Any],
                           slots: dict[tuple[str, str], int]) -> list[_Step]:
        """Runs of consecutive steps on one device whose provider asks for device graphs
        (``enable_cuda_graph``) become one step that records them once and replays them; each
        run's outcome (recorded, or why not) goes to ``device_graphs``."""
        runtime = self.runtime

        def wants(step: _Step) -> bool:
            if step.node is None or step.copy is not None:
                return False
            options = runtime.options.get(step.provider, {})
            return bool(options.get(GRAPH_OPTION)) and not runtime.device(step.provider).is_host

        where = {s: device for (_, device), s in slots.items()}
        names = {s: name for (name, _), s in slots.items()}
        out: list[_Step] = []
        i = 0
        while i < len(steps):
            if not wants(steps[i]):
                out.append(steps[i])
                i += 1
                continue
            j = i
            while j < len(steps) and wants(steps[j]) and steps[j].provider == steps[i].provider:
                j += 1
            out.extend(self._partition(steps[i:j], steps[j:], keep, initial, where, names))
            i = j
        return out

    def _partition(self, part: list[_Step], later: list[_Step], keep: set[int],
                   initial: dict[int, Any], where: dict[int, str],
                   names: dict[int, str]) -> list[_Step]:
        """``part`` as one recording step, or unchanged (with the reason) when it cannot be."""
        provider = part[0].provider
        device = self.runtime.device(provider)
        report = PartitionCapture(provider, device.name, [s.node.name for s in part])
        self.device_graphs.append(report)
        produced = {s for step in part for s in step.outputs if s >= 0}
        reads = [s for step in part for s in step.inputs if s >= 0 and s not in produced]
        inputs = list(dict.fromkeys(s for s in reads if s not in initial))
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
        constants = {s: initial[s] for s in reads if s in initial}
        kernel = CapturedPartition(part, device, inputs, constants, outputs)
        views = [self.graph.values.get(names[s]) for s in outputs]
        node = PartitionNode(f"device graph {len(self.device_graphs)} on {provider}", part,
                             views)
        report.captured = True
        step = _Step(node, kernel, tuple(inputs), tuple(outputs), provider)
        spans = [self._span_args(s) for s in part]
        step.span = {"op_type": node.qualified_op, "provider": provider, "device": device.name,
                     **{k: sum(a[k] for a in spans) for k in ("bytes", "flops",
                                                             "estimated_us")}}
        return [step]

    def _create_kernel(self, node: NodeView, provider: str) -> tuple[Kernel, str]:
        """The kernel for ``node`` from ``provider``; when that fails, from the next provider
        that claimed the node (the placement is updated). With no other claimant the failure is
        raised; when every claimant fails, a KernelError lists them all."""
        try:
            return self.runtime.create_kernel(node, provider, self.placement), provider
        except KernelError as first:
            failures = [str(first)]
            for other in self.placement.table.claimants(node.name):
                if other == provider:
                    continue
                try:
                    kernel = self.runtime.create_kernel(node, other, self.placement)
                except KernelError as exc:
                    failures.append(str(exc))
                    continue
                placed = self.placement.by_node[node.name]
                placed.provider = other
                placed.cost_us = self.placement.table.answers[node.name][other].cost.total_us
                self.placement.transfers = implied_transfers(self.placement)
                self.runtime.model.warnings.append(
                    f"{failures[0]}; node {node.name!r} runs on {other!r} instead")
                return kernel, other
            if len(failures) == 1:
                raise
            raise KernelError(
                f"{self.label}: no provider that claims node {node.name!r} could create its "
                "kernel:\n  " + "\n  ".join(failures)) from first

    def _check_static_size(self, node: NodeView, value: ValueView) -> None:
        """Refuse, before any run allocates it, an output whose static size overflows int64 or
        exceeds the session's ``max_tensor_bytes``."""
        if value.dtype is None or not value.is_static:
            return
        count = 1
        for d in value.shape:
            count *= d
        if count > _INT64_MAX:
            raise ResourceLimitError(
                f"{self.label}: output {value.name!r} of node {node.name!r} has shape "
                f"{list(value.shape)}, whose element count overflows int64")
        limit = self.runtime.max_tensor_bytes
        nbytes = value.dtype.storage_bytes(count)
        if limit is not None and nbytes > limit:
            raise ResourceLimitError(
                f"{self.label}: output {value.name!r} of node {node.name!r} would take {nbytes} "
                f"bytes (shape {list(value.shape)}), over the limit of {limit} "
                "(max_tensor_bytes / EP_HOST_MAX_TENSOR_BYTES)")

    def run(self, feeds: Mapping[str, Any], scope: Mapping[str, Any] | None = None,
            names: Sequence[str] | None = None, cancel: Any = None) -> list[Any]:
        """Run with inputs by name (already checked) and outer values; returns the outputs.
        ``cancel``: a :class:`RunOptions` whose ``terminate`` is checked before every step."""
        if cancel is None and self.tracer is None and self.runtime.max_tensor_bytes is None:
            return self._run_compiled(feeds, scope, names)
        values: list[Any] = [None] * self.n_slots
        for s, v in self.initial.items():
            values[s] = v
        for name, value in feeds.items():
            values[self.input_slots[name]] = value
        if self.outer_slots:
            for name, s in self.outer_slots.items():
                values[s] = scope[name]
        tracer = self.tracer
        if tracer is None:
            for step in self.steps:
                if cancel is not None and cancel.terminate:
                    self._cancelled(step)
                args = [values[s] if s >= 0 else None for s in step.inputs]
                if step.copy is not None:
                    values[step.outputs[0]] = self._copy(step, args[0])
                else:
                    outs = self._run_step(step, args, values)
                    for s, out in zip(step.outputs, outs, strict=False):
                        if s >= 0:
                            values[s] = out
                for s in step.release:
                    values[s] = None
        else:
            self._run_traced(tracer, values, cancel)
        return [values[self.output_slots[n]] for n in (names or self.output_names)]

    def _run_compiled(self, feeds: Mapping[str, Any], scope: Mapping[str, Any] | None,
                      names: Sequence[str] | None) -> list[Any]:
        """The same steps through the plan's generated function (no tracing, cancel or limit:
        those take the loop above)."""
        values = {self.input_slots[name]: value for name, value in feeds.items()}
        for name, s in self.outer_slots.items():
            values[s] = scope[name]
        compiled = self.compiled
        try:
            outs = compiled.run(values)
        except Exception as exc:
            line = compiled.failed_line(exc.__traceback__)
            if line is None or line in compiled.check_lines:
                raise
            raise self._failure(self.steps[compiled.lines[line]], exc) from exc
        if names is None or names is self.output_names:
            return outs
        index = self._output_index
        return [outs[index[n]] for n in names]

    def _failure(self, step: _Step, exc: BaseException) -> KernelError:
        """The error for a step that raised ``exc``: the copy, or the node and its provider."""
        if step.copy is not None:
            src, dst = step.copy
            return KernelError(f"{self.label}: copying a tensor from {src.name} to {dst.name} "
                               f"failed: {describe_exception(exc)}")
        node = step.node
        return KernelError(f"{self.label}: node {node.name!r} ({node.qualified_op}) failed on "
                           f"provider {step.provider!r}: {describe_exception(exc)}")

    def _copy(self, step: _Step, value: Any) -> Any:
        src, dst = step.copy
        try:
            return dst.upload(src.download(value))
        except Exception as exc:
            raise self._failure(step, exc) from exc

    def _check_one(self, i: int, j: int, out: Any) -> Any:
        """The full check of output ``j`` of step ``i`` (the generated code's quick test
        failed): a numpy scalar becomes a 0-d array, a wrong dtype is an error, a wrong shape
        a warning (an error with ``EP_HOST_STRICT``)."""
        step = self.steps[i]
        if type(out) is tuple and step.kernel.call is not None:
            out = out[0]  # Kernel.call of a function with several outputs, one of them wanted
        if isinstance(out, np.generic):
            out = np.asarray(out)
        self._check_output(step, j, out)
        return out

    def _check_count(self, step: _Step, outs: Any) -> Any:
        """A kernel's ``run`` must return a sequence with an entry per wanted output."""
        expected = len(step.outputs)
        if not isinstance(outs, Sequence) or len(outs) < sum(1 for s in step.outputs if s >= 0):
            got = len(outs) if isinstance(outs, Sequence) else type(outs).__name__
            raise KernelError(
                f"{self.label}: node {step.node.name!r} on provider {step.provider!r} "
                f"returned {got} output(s), expected {expected}"
            )
        return outs

    def _cancelled(self, step: _Step) -> None:
        where = (f"node {step.node.name!r}" if step.node is not None else "a device copy")
        raise RunCancelledError(
            f"{self.label}: the run was cancelled (RunOptions.terminate) before {where}")

    def _run_traced(self, tracer: Tracer, values: list[Any], cancel: Any = None) -> None:
        """The same loop with a span per node and per device copy."""
        for step in self.steps:
            if cancel is not None and cancel.terminate:
                self._cancelled(step)
            args = [values[s] if s >= 0 else None for s in step.inputs]
            if step.copy is not None:
                src, dst = step.copy
                nbytes = getattr(args[0], "nbytes", 0)
                with tracer.span(f"copy {src.name}->{dst.name}", "copy", bytes=nbytes,
                                 source=src.name, destination=dst.name):
                    values[step.outputs[0]] = self._copy(step, args[0])
            else:
                with tracer.span(step.node.name, "node", **self._span_args(step)):
                    outs = self._run_step(step, args, values)
                for s, out in zip(step.outputs, outs, strict=False):
                    if s >= 0:
                        values[s] = out
            for s in step.release:
                values[s] = None

    def _span_args(self, step: _Step) -> dict[str, Any]:
        """A node step's trace-span arguments: its placed estimate, worked out on its first
        traced run and kept (a recorded partition's are set when it is made)."""
        if step.span is None:
            node = step.node
            cost = self.placement.table.answers[node.name][step.provider].cost
            step.span = {"op_type": node.qualified_op, "provider": step.provider,
                         "device": self.runtime.device(step.provider).name,
                         "bytes": cost.bytes_moved, "flops": cost.flops,
                         "estimated_us": cost.total_us}
        return step.span

    def _run_step(self, step: _Step, args: list[Any], values: list[Any]) -> Sequence[Any]:
        kwargs = {"scope": {n: values[s] for n, s in step.scope}} if step.scope else {}
        try:
            if step.lock is not None:
                with step.lock:
                    outs = step.kernel.run(*args, **kwargs)
            else:
                outs = step.kernel.run(*args, **kwargs)
        except Exception as exc:
            raise self._failure(step, exc) from exc
        self._check_count(step, outs)
        if any(isinstance(out, np.generic) for out in outs):  # as the compiled run does
            outs = [np.asarray(out) if isinstance(out, np.generic) else out for out in outs]
        for i, out in enumerate(outs[:len(step.expect)]):
            self._check_output(step, i, out)
        return outs

    def _check_output(self, step: _Step, i: int, out: Any) -> None:
        dtype, shape = step.expect[i]
        got_dtype = getattr(out, "dtype", None)
        got_shape = getattr(out, "shape", None)
        if dtype is not None and got_dtype is not None and got_dtype != dtype:
            self._bad_output(step, i, f"dtype {got_dtype}, expected {np.dtype(dtype)}")
        if shape is not None and got_shape is not None and (
                len(got_shape) != len(shape)
                or any(w is not None and w != g for w, g in zip(shape, got_shape,
                                                               strict=False))):
            self._bad_shape(step, i, got_shape, shape)
        limit = self.runtime.max_tensor_bytes
        if limit is not None and getattr(out, "nbytes", 0) > limit:
            # shapes known only now are checked right after the kernel returns; the tensor
            # is dropped with this exception and the session stays usable
            raise ResourceLimitError(
                f"{self.label}: output {i} of node {step.node.name!r} "
                f"({step.node.qualified_op}) on provider {step.provider!r} takes "
                f"{out.nbytes} bytes (shape {list(got_shape or ())}), over the limit of "
                f"{limit} (max_tensor_bytes / EP_HOST_MAX_TENSOR_BYTES)")

    def _bad_shape(self, step: _Step, index: int, got: Any, want: tuple[Any, ...]) -> None:
        """onnx's shape inference is sometimes wrong (MaxPool's ceil_mode, Squeeze), so a shape
        that differs from the inferred one is an error only with ``EP_HOST_STRICT``; otherwise
        a warning in ``model.warnings``, once per node and output."""
        what = f"shape {list(got)}, expected {[d if d is not None else '?' for d in want]}"
        if self.runtime.host.strict:
            self._bad_output(step, index, what)
        key = (step.node.name, index)
        if key not in self.runtime.warned:
            self.runtime.warned.add(key)
            self.runtime.model.warnings.append(
                f"node {step.node.name!r} ({step.node.qualified_op}) on provider "
                f"{step.provider!r} returned output {index} with {what} (by shape inference)")

    def _bad_output(self, step: _Step, index: int, what: str) -> None:
        node = step.node
        raise KernelError(
            f"{self.label}: node {node.name!r} ({node.qualified_op}) on provider "
            f"{step.provider!r} returned output {index} with {what}")


def _release_points(steps: list[_Step], keep: set[int]) -> None:
    last_use: dict[int, int] = {}
    for i, step in enumerate(steps):
        for s in (*step.inputs, *step.outputs, *(s for _, s in step.scope)):
            if s >= 0:
                last_use[s] = i
    frees: dict[int, list[int]] = {}
    for s, i in last_use.items():
        if s not in keep:
            frees.setdefault(i, []).append(s)
    for i, step in enumerate(steps):
        step.release = tuple(frees.get(i, ()))


class CompiledGraph:
    """A control-flow body compiled with the session's providers: ``run(inputs, scope)``."""

    def __init__(self, plan: ExecutionPlan):
        self.plan = plan
        self.input_names = list(plan.input_slots)
        self.output_names = list(plan.output_names)

    @property
    def placement(self) -> Placement:
        return self.plan.placement

    def run(self, inputs: Sequence[Any], scope: Mapping[str, Any] | None = None) -> list[Any]:
        """Run the body with its formal inputs in order and the outer values it reads."""
        if len(inputs) > len(self.input_names):
            raise KernelError(f"{self.plan.label}: body {self.plan.graph.name!r} takes "
                              f"{len(self.input_names)} inputs, got {len(inputs)}")
        feeds = dict(zip(self.input_names, inputs, strict=False))
        return self.plan.run(feeds, scope or {})


class _Runtime:
    """What plans share: the model, the host, the providers and how to place a (sub)graph."""

    def __init__(self, model: Model, host: Host, providers: list[str],
                 options: dict[str, dict[str, Any]], strategy: str,
                 tracer: Tracer | None = None, max_tensor_bytes: int | None = None):
        self.tracer = tracer
        self.max_tensor_bytes = max_tensor_bytes
        self.warned: set[tuple[str, int]] = set()  # (node, output) whose shape was warned about
        self.model = model
        self.host = host
        self.providers = providers
        self.options = options
        self.strategy = strategy

    def device(self, provider: str) -> Device:
        info = self.host.records[provider].info
        return HOST if info is None else info.device

    def place(self, graph: GraphView, pins: Mapping[str, str] | None = None) -> Placement:
        table = capability.walk(self.host, self.model, self.providers, self.options,
                                nodes=graph.nodes)
        devices = {p: self.device(p) for p in self.providers}
        return choose(table, devices, strategy=self.strategy, pins=pins,
                      model=self.model.label)

    def compile(self, graph: GraphView) -> CompiledGraph:
        """Place and compile a body graph; its outer-scope names become scope inputs."""
        plan = ExecutionPlan(self, graph, self.place(graph), outer=graph_captures(graph),
                             body=True)
        return CompiledGraph(plan)

    def create_kernel(self, node: NodeView, provider: str, placement: Placement) -> Kernel:
        context = replace(placement.table.contexts[provider], subgraphs=self)
        try:
            kernel = self.host.call(provider, "ep_host_create_kernel", node=node, context=context)
        except HostError:
            raise
        except Exception as exc:
            raise KernelError(
                f"{self.model.label}: provider {provider!r} failed to create a kernel for node "
                f"{node.name!r} ({node.qualified_op}): {describe_exception(exc)}"
            ) from exc
        if not isinstance(kernel, Kernel):
            raise KernelError(
                f"{self.model.label}: provider {provider!r} returned "
                f"{type(kernel).__name__} instead of a Kernel for node {node.name!r}"
            )
        return kernel


def captured_names(node: NodeView) -> set[str]:
    """Outer-scope names the bodies of ``node`` read."""
    out: set[str] = set()
    for sub in node.subgraphs.values():
        out |= graph_captures(sub)
    return out


def graph_captures(graph: GraphView) -> set[str]:
    return _captured(graph._proto)


def select_providers(host: Host, requested: Sequence[str] | None) -> list[str]:
    """The providers to use: the requested ones in order (each must exist), else every loaded
    provider, in name order with ``cpu`` last (devices first, as onnxruntime users list them)."""
    if requested is None:
        records = sorted(host.records.values(), key=lambda r: (r.name == "cpu", r.name))
        return [r.name for r in records]
    missing = [p for p in requested if p not in host.records]
    if missing:
        known = ", ".join(sorted(host.records)) or "none"
        raise KernelError(f"unknown provider(s) {', '.join(missing)}; installed: {known}")
    return list(requested)


class InferenceSession:
    """Place ``model`` on the providers and run it, with onnxruntime's ``InferenceSession`` API.

    ``providers``: provider names in priority order (``"cpu"``; onnxruntime's
    ``"CPUExecutionProvider"`` is accepted too); default: every installed provider.
    ``provider_options``: a dict per provider name, or a list parallel to ``providers``.
    ``strategy``: ``"optimal"`` (default), ``"greedy"`` or ``"priority"``.
    ``pins``: node name -> provider.
    ``exclude``: providers not to use. ``host``: a :class:`Host` with providers already loaded.
    ``intra_op_num_threads``: BLAS threads during runs (0: leave numpy's BLAS as it is; default:
    1 on machines with at most 4 logical CPUs, where a second thread is usually slower).
    ``optimizations``: the graph passes to run before placement (default: all of
    ``ep_host.optimize.PASSES``; ``()`` for none); ``disable_optimizations``: passes to skip.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | bytes | Any,
        providers: Sequence[Any] | None = None,
        provider_options: ProviderOptions | None = None,
        *,
        strategy: str = "optimal",
        pins: Mapping[str, str] | None = None,
        exclude: Iterable[str] = (),
        host: Host | None = None,
        base_dir: str | None = None,
        trace: str | os.PathLike[str] | Tracer | None = None,
        max_tensor_bytes: int | None = None,
        intra_op_num_threads: int | None = None,
        optimizations: Iterable[str] | None = None,
        disable_optimizations: Iterable[str] = (),
    ):
        names = provider_names(providers)
        self._threads = BlasThreads(default_threads() if intra_op_num_threads is None
                                    else intra_op_num_threads)
        if max_tensor_bytes is None:
            max_tensor_bytes = max_tensor_bytes_from_env()
        if trace is None or isinstance(trace, Tracer):
            self.tracer, self._trace_path = trace, None
        else:
            self.tracer, self._trace_path = Tracer(), os.fspath(trace)
        loaded = model if isinstance(model, Model) else load_model(model, base_dir=base_dir)
        self._model = optimize(loaded, optimizations, disable_optimizations)
        self._host = host if host is not None else Host.discover(names)
        chosen = [p for p in select_providers(self._host, names) if p not in set(exclude)]
        if isinstance(provider_options, Sequence) and not isinstance(provider_options, Mapping):
            provider_options = dict(zip(chosen, provider_options, strict=False))
        self._options = {k: dict(v) for k, v in (provider_options or {}).items()}
        self._runtime = _Runtime(self._model, self._host, chosen, self._options, strategy,
                                 self.tracer, max_tensor_bytes)
        self.placement: Placement = self._runtime.place(self._model.graph, pins)
        self._plan = ExecutionPlan(self._runtime, self._model.graph, self.placement)

    @property
    def _steps(self) -> list[_Step]:
        return self._plan.steps

    @property
    def device_graphs(self) -> list[PartitionCapture]:
        """Each device partition whose provider asked for device graphs
        (``provider_options={"cuda": {"enable_cuda_graph": True}}``): recorded, or why not."""
        return list(self._plan.device_graphs)

    def end_profiling(self) -> str | None:
        """Write the trace (Chrome trace-event JSON, opens in Perfetto) to the ``trace`` path
        given at creation and return the path; ``None`` when the session is not tracing to a
        file."""
        if self.tracer is None or self._trace_path is None:
            return None
        self.tracer.write(self._trace_path)
        return self._trace_path

    # -- onnxruntime's API ------------------------------------------------------------------

    def get_inputs(self) -> list[NodeArg]:
        return [_node_arg(v) for v in self._model.graph.inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [_node_arg(v) for v in self._model.graph.outputs]

    def get_providers(self) -> list[str]:
        return list(self.placement.providers)

    def get_modelmeta(self) -> Any:
        return self._model.proto.metadata_props

    @property
    def model(self) -> Model:
        return self._model

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> list[Any]:
        """Run the model; returns the requested outputs (all when ``output_names`` is falsy)."""
        plan = self._plan
        names = list(output_names) if output_names else plan.output_names
        unknown = [n for n in names if n not in plan.output_slots]
        if unknown:
            raise InputError(
                f"{self._model.label}: unknown output(s) {', '.join(map(repr, unknown))}; "
                f"the model's outputs are {', '.join(map(repr, plan.output_names))}"
            )
        feeds = self._check_inputs(input_feed)
        cancel = run_options if getattr(run_options, "terminate", None) is not None else None
        with self._threads:
            if self.tracer is None:
                outputs = plan.run(feeds, names=names, cancel=cancel)
            else:
                with self.tracer.span("run", "session", model=self._model.label):
                    outputs = plan.run(feeds, names=names, cancel=cancel)
        return [_output(v) for v in outputs]

    def _check_inputs(self, feed: Mapping[str, Any]) -> dict[str, Any]:
        label = self._model.label
        declared = {v.name: v for v in self._model.graph.inputs}
        unknown = [n for n in feed if n not in declared]
        if unknown:
            initializers = set(self._model.graph.initializer_inputs)
            hint = [n for n in unknown if n in initializers]
            extra = (f" ({', '.join(hint)} is an initializer and cannot be fed)" if hint else "")
            raise InputError(
                f"{label}: unknown input(s) {', '.join(map(repr, unknown))}{extra}; "
                f"the model's inputs are {', '.join(map(repr, declared))}"
            )
        missing = [n for n in declared if n not in feed]
        if missing:
            raise InputError(f"{label}: missing input(s) {', '.join(map(repr, missing))}")
        bound: dict[str, tuple[int, str]] = {}
        out = {}
        for name, view in declared.items():
            array = feed[name]
            if view.kind in ("sequence", "optional", "map"):
                out[name] = array
                continue
            if array is None:
                raise InputError(f"{label}: input {name!r} is None")
            if not isinstance(array, np.ndarray):
                array = np.asarray(array)
            if not array.dtype.isnative:
                array = array.astype(array.dtype.newbyteorder("="))
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)  # kernels may assume C order
            limit = self._runtime.max_tensor_bytes
            if limit is not None and array.nbytes > limit:
                raise ResourceLimitError(
                    f"{label}: input {name!r} takes {array.nbytes} bytes, over the limit of "
                    f"{limit} (max_tensor_bytes / EP_HOST_MAX_TENSOR_BYTES)")
            expected = view.dtype.numpy if view.dtype is not None else None
            if expected is not None and array.dtype != expected:
                raise InputError(
                    f"{label}: input {name!r} must be {view.dtype.name}, got {array.dtype} "
                    "(ep-host does not cast inputs)"
                )
            if view.shape is not None:
                if array.ndim != len(view.shape):
                    raise InputError(
                        f"{label}: input {name!r} must have rank {len(view.shape)} "
                        f"(shape {list(view.shape)}), got shape {list(array.shape)}"
                    )
                for axis, (want, got) in enumerate(zip(view.shape, array.shape, strict=True)):
                    if isinstance(want, int) and want != got:
                        raise InputError(
                            f"{label}: input {name!r} dim {axis} must be {want} "
                            f"(shape {list(view.shape)}), got shape {list(array.shape)}"
                        )
                    if isinstance(want, str) and want:
                        prev = bound.setdefault(want, (got, name))
                        if prev[0] != got:
                            raise InputError(
                                f"{label}: dim {want!r} is {prev[0]} in input {prev[1]!r} "
                                f"but {got} in input {name!r}"
                            )
            out[name] = _readonly_view(array)
        return out


def _output(value: Any) -> Any:
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        return value.copy()  # constants and inputs are read-only; never hand out session state
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, list):
        return [_output(v) for v in value]
    return value


def _readonly_view(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view
