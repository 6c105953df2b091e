"""Sessions: place a model, create each kernel once, and run it like onnxruntime does.

The face over the plan (``ep_host.plan``: slots, steps, copies, built once) and its run
(``ep_host.runloop``): onnxruntime's ``InferenceSession`` API, input checks, and the runtime
that places and compiles control-flow bodies with the same providers.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ep_host import capability
from ep_host.declared_types import declare_output_types
from ep_host.device_graphs import OPTION as GRAPH_OPTION
from ep_host.device_graphs import PartitionCapture
from ep_host.discovery import Host, shared_host
from ep_host.errors import (
    HostError,
    InputError,
    KernelError,
    RunCancelledError,
    describe_exception,
    lost_provider,
    memory_stage,
    out_of_memory,
)
from ep_host.feeds import FeedChecker, plain_runner
from ep_host.graph import GraphView, NodeView, unlink_views
from ep_host.kernel import Kernel
from ep_host.limits import MAX_TENSOR_BYTES, max_tensor_bytes_from_env, run_timeout_from_env
from ep_host.loading import Model, load_model
from ep_host.optimize import optimize
from ep_host.ort_api import (
    IOBinding,
    ModelMetadata,
    NodeArg,
    OrtValue,
    ProviderNames,
    SessionOptions,
    alias_map,
    device_plan,
    gather_provider_options,
    model_metadata,
    node_arg,
    session_arguments,
    write_into,
)
from ep_host.placement import Placement, choose
from ep_host.plan import Plan, Step, build_plan
from ep_host.prepacked import SHARED_PREPACKED, PrepackedUse
from ep_host.provider import HOST, Device, ProviderContext
from ep_host.runloop import PlanRun, RunToken, StepChecks
from ep_host.sole import hand_out
from ep_host.subgraph import PartitionView
from ep_host.threads import BlasThreads, blas_stays_single, default_threads
from ep_host.tracing import Tracer

ProviderOptions = Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]]


def provider_names(providers: Iterable[Any] | None) -> list[str] | None:
    """The names in a ``providers`` list (onnxruntime's ``(name, options)`` pairs allowed)."""
    if providers is None:
        return None
    return [p[0] if isinstance(p, tuple) else p for p in providers]


def discover_host(names: Sequence[str] | None, isolate: Any = None,
                  ray_address: str | None = None) -> Host:
    """A host with the providers ``names`` asks for loaded (``isolate``: see the session); a
    name that is no entry point's may be another name a provider gives itself
    (``ProviderInfo.aliases``), so then all load. Without workers, sessions share the host
    (``shared_host``)."""
    if not isolate and not ray_address:
        host = shared_host(names)
        if names is not None and any(n not in host.records for n in names):
            host = shared_host()
        return host
    host = Host.discover(names, isolate=isolate, ray_address=ray_address)
    if names is not None and any(n not in host.records for n in names):
        host = Host.discover(isolate=isolate, ray_address=ray_address)
    return host


def resolve_aliases(host: Host, names: Sequence[str] | None) -> list[str] | None:
    """``names`` with each alias (``CPUExecutionProvider``...) replaced by its provider's name."""
    if names is None:
        return None
    aliases = alias_map(host)
    return [n if n in host.records else aliases.get(n, n) for n in names]


def trace_process_label(model: Model) -> str:
    """How a trace names the model it ran: its file's name, else its graph's name."""
    if model.path:
        return os.path.basename(model.path)
    return model.proto.graph.name or model.label


class CompiledGraph:
    """A control-flow body compiled with the session's providers: ``run(inputs, scope)``."""

    def __init__(self, plan: Plan, runner: PlanRun):
        self.plan = plan
        self.runner = runner
        self.input_names = list(plan.input_slots)
        self.output_names = list(plan.output_names)

    @property
    def placement(self) -> Placement:
        return self.plan.placement

    def run(self, inputs: Sequence[Any], scope: Mapping[str, Any] | None = None) -> list[Any]:
        """Run the body with its formal inputs in order and the outer values it reads."""
        if len(inputs) > len(self.input_names):
            raise KernelError(f"{self.plan.label}: body {self.plan.graph_name!r} takes "
                              f"{len(self.input_names)} inputs, got {len(inputs)}")
        feeds = dict(zip(self.input_names, inputs, strict=False))
        return self.runner.run(feeds, scope or {})


class _Runtime:
    """What plans share: the model, the host, the providers, the checks of every step's
    results, and how to place and compile a (sub)graph."""

    def __init__(self, model: Model, host: Host, providers: list[str],
                 options: dict[str, dict[str, Any]], strategy: str,
                 tracer: Tracer | None = None, max_tensor_bytes: int | None = None,
                 device_graphs: bool = False, threads: int = 0, share_prepacked: bool = False,
                 frees_constants: bool = False):
        self.tracer = tracer
        self.prepacked = SHARED_PREPACKED if share_prepacked else None
        self.frees_constants = frees_constants and not share_prepacked  # ep_host.released
        self.threads = threads
        self.max_tensor_bytes = max_tensor_bytes
        self.model = model
        self.host = host
        self.providers = providers
        self.options = options
        self.strategy = strategy
        self.device_graphs = device_graphs
        self.checks = StepChecks(model.label, max_tensor_bytes=max_tensor_bytes,
                                 warnings=model.warnings)
        self._contexts: dict[str, tuple[ProviderContext, ProviderContext]] = {}
        self._creators: dict[str, Any] = {}  # per provider, for one plan: Host.batch_caller

    def kernel_context(self, placement: Placement, provider: str) -> ProviderContext:
        """The context ``provider``'s kernels are created with: the walk's, with this runtime
        for bodies and the session's threads; made once per provider and plan (a ``replace``
        per node took 6 us of the plan's 60)."""
        source = placement.table.contexts[provider]
        held = self._contexts.get(provider)
        if held is None or held[0] is not source:
            held = self._contexts[provider] = (source, replace(
                source, subgraphs=self, intra_op_num_threads=self.threads))
        return held[1]

    def device(self, provider: str) -> Device:
        info = self.host.records[provider].info
        return HOST if info is None else info.device

    def wants_device_graph(self, provider: str) -> bool:
        """Whether ``provider``'s partitions should be recorded as device graphs: the session
        asks for all, or the provider's options do (``enable_device_graph`` or the option its
        ``ProviderInfo.device_graph_option`` names)."""
        if self.device_graphs:
            return True
        options = self.options.get(provider, {})
        info = self.host.records[provider].info
        own = info.device_graph_option if info is not None else ""
        return bool(options.get(GRAPH_OPTION) or (own and options.get(own)))

    @property
    def strict(self) -> bool:
        return self.host.strict

    def compiling(self) -> set[str]:
        """The providers in use that compile partitions (``ep_host_compile_partition``)."""
        records = self.host.records
        return {p for p in self.providers
                if records[p].available and "ep_host_compile_partition" in records[p].hooks}

    def compile_partition(self, partition: PartitionView, placement: Placement) -> Kernel:
        provider = partition.provider
        context = self.kernel_context(placement, provider)
        members = ", ".join(n.name for n in partition.nodes)
        try:
            kernel = self.host.call(provider, "ep_host_compile_partition", partition=partition,
                                    context=context)
        except (HostError, MemoryError):
            raise
        except Exception as exc:
            raise KernelError(
                f"{self.model.label}: provider {provider!r} failed to compile partition "
                f"{partition.name!r} (nodes {members}): {describe_exception(exc)}") from exc
        if not isinstance(kernel, Kernel):
            raise KernelError(
                f"{self.model.label}: provider {provider!r} returned {type(kernel).__name__} "
                f"instead of a Kernel for partition {partition.name!r} (nodes {members})")
        return kernel

    def place(self, graph: GraphView, pins: Mapping[str, str] | None = None) -> Placement:
        label, size = self.model.label, len(graph.nodes)
        with memory_stage("the capability walk", label, size):
            table = capability.walk(self.host, self.model, self.providers, self.options,
                                    nodes=graph.nodes)
        devices = {p: self.device(p) for p in self.providers}
        with memory_stage("placement", label, size):
            return choose(table, devices, strategy=self.strategy, pins=pins, model=label)

    def plan(self, graph: GraphView, placement: Placement, outer: Iterable[str] = (),
             body: bool = False) -> tuple[Plan, PlanRun]:
        with memory_stage("building the plan", self.model.label, len(graph.nodes)):
            try:
                plan = build_plan(self, graph, placement, label=self.model.label, outer=outer,
                                  body=body)
            finally:  # they refer to this runtime: kept, they would make a reference cycle
                self._contexts.clear()
                self._creators.clear()
        # a body's nodes are traced only at full verbosity
        tracer = self.tracer if self.tracer is not None and (
            not body or self.tracer.verbosity >= Tracer.FULL) else None
        return plan, PlanRun(plan, self.checks, tracer, blas_limit=self.threads)

    def compile(self, graph: GraphView) -> CompiledGraph:
        """Place and compile a body graph; its outer-scope names become scope inputs."""
        plan, runner = self.plan(graph, self.place(graph), outer=graph.outer_names(),
                                 body=True)
        return CompiledGraph(plan, runner)

    def create_kernel(self, node: NodeView, provider: str, placement: Placement) -> Kernel:
        context = self.kernel_context(placement, provider)
        via = self._creators.get(provider)
        if via is None:  # pluggy's dispatch skipped where it would call one plain function
            via = self._creators[provider] = self.host.batch_caller(
                self.host.records[provider], "ep_host_create_kernel")
        try:
            kernel = self.host.call(provider, "ep_host_create_kernel", via, node=node,
                                    context=context)
        except (HostError, MemoryError):  # out of memory: the stage's error, not the provider's
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


def select_providers(host: Host, requested: Sequence[str] | None) -> list[str]:
    """The providers to use: the requested ones in order (each must exist; aliases resolved),
    else every loaded provider, in name order with host-device providers last (devices first,
    as onnxruntime users list them)."""
    if requested is None:
        def host_last(record: Any) -> tuple[bool, str]:
            device = record.info.device if record.info is not None else HOST
            return device.is_host, record.name

        return [r.name for r in sorted(host.records.values(), key=host_last)]
    requested = resolve_aliases(host, requested) or []
    missing = [p for p in requested if p not in host.records]
    if missing:
        known = ", ".join(host.installed_names()) or "none"
        raise KernelError(f"unknown provider(s) {', '.join(missing)}; installed: {known}")
    return list(requested)


class InferenceSession:
    """Place ``model`` on the providers and run it, with onnxruntime's ``InferenceSession`` API.

    ``sess_options``: a :class:`SessionOptions` (the second positional argument, as in
    onnxruntime; ep-host's old order ``InferenceSession(model, ["cpu"])`` still works, with a
    DeprecationWarning). Its thread count and optimization level apply where the keyword
    arguments below are not given.
    ``providers``: provider names in priority order (``"cpu"``; onnxruntime's
    ``"CPUExecutionProvider"`` is accepted too, and ``(name, options)`` pairs); default: every
    installed provider.
    ``provider_options``: a dict per provider name, or a list parallel to ``providers``.
    ``strategy``: a name from ``ep_host.strategies`` (``ep-host place --help`` lists them;
    default ``"optimal"``); an unknown name is a ``PlacementError``.
    ``pins``: node name -> provider.
    ``exclude``: providers not to use. ``host``: a :class:`Host` with providers already loaded.
    ``intra_op_num_threads``: BLAS threads during runs (0: leave numpy's BLAS as it is; default:
    1 on machines with at most 4 logical CPUs, where a second thread is usually slower).
    ``optimizations``: the graph passes to run before placement (default: all of
    ``ep_host.optimize.PASSES``; ``()`` for none); ``disable_optimizations``: passes to skip.
    ``device_graphs``: record each partition of every provider whose device can capture as a
    device graph (per provider: the provider option ``enable_device_graph``).
    ``share_prepacked``: share constants and what kernels pack from them (``Kernel.prepacked``)
    with the process's other sharing sessions, by contents, and a model file's big weights with
    every sharing session of the same file: two sessions of one model hold one copy. Default:
    ``SessionOptions.share_prepacked`` (off).
    ``isolate``: providers in worker processes (``ep-host[ray]``): ``True`` for all but ep-host's
    CPU EP, or their names; one that dies or hangs is failed and its nodes placed elsewhere.
    ``ray_address``: also the providers of the other nodes of that Ray cluster (``"auto"``: the
    one running here), each its own provider ``NAME@nodeK`` pinned to its node.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | bytes | Any,
        sess_options: SessionOptions | None = None,
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
        device_graphs: bool = False,
        share_prepacked: bool | None = None,
        isolate: bool | Sequence[str] | None = None,
        ray_address: str | None = None,
    ):
        sess_options, providers, provider_options = session_arguments(
            sess_options, providers, provider_options)
        self._sess_options = sess_options.copy() if sess_options else SessionOptions()
        self._sess_options.check()
        names = provider_names(providers)
        if intra_op_num_threads is None:
            intra_op_num_threads = self._sess_options.threads()
        if optimizations is None:
            optimizations = self._sess_options.passes()
        self._threads = BlasThreads(default_threads() if intra_op_num_threads is None
                                    else intra_op_num_threads)
        self._sess_options.intra_op_num_threads = self._threads.threads
        if share_prepacked is None:
            share_prepacked = bool(self._sess_options.share_prepacked)
        self._sess_options.share_prepacked = bool(share_prepacked)
        if max_tensor_bytes is None:
            max_tensor_bytes = max_tensor_bytes_from_env()
        self._run_timeout = run_timeout_from_env()
        # runs without options need no cancel token, timeout thread or tensor limit
        self._plain_runs = not self._run_timeout and max_tensor_bytes is None
        if trace is None and self._sess_options.enable_profiling:
            trace = self._sess_options.profile_path()
        if trace is None or isinstance(trace, Tracer):
            self.tracer, self._trace_path = trace, None
        else:
            self.tracer, self._trace_path = Tracer(), os.fspath(trace)
        loaded = model if isinstance(model, Model) else load_model(
            model, base_dir=base_dir, share_weights=self._sess_options.share_prepacked)
        if self._trace_path is not None:
            self.tracer.process_name = f"ep-host: {trace_process_label(loaded)}"
        self._host = (host if host is not None
                      else discover_host(names, isolate, ray_address))
        if self.tracer is not None:  # a trace process per cluster node (``ep_host.cluster``)
            self.tracer.processes.update({r.info.device.name: r.node for r in
                                          self._host.records.values() if r.node and r.info})
        chosen = [p for p in select_providers(self._host, names) if p not in set(exclude)]
        loaded = declare_output_types(self._host, loaded, chosen)
        # a model this session parsed itself is rewritten in place: nobody else holds it
        parsed_here = isinstance(model, str | os.PathLike | bytes | bytearray | memoryview)
        with memory_stage("optimization", loaded.label, len(loaded.graph.nodes)):
            self._model = optimize(loaded, optimizations, disable_optimizations,
                                   in_place=parsed_here)
        if self._model is not loaded and loaded is not model:
            # the model as loaded is this session's own and dropped here: its views are freed
            # now rather than at Python's next full collection (BERT-base: 415 MB)
            unlink_views(loaded.graph_views)
        del loaded
        self._options = gather_provider_options(self._host, providers, provider_options)
        self._device_plans: dict[Any, PlanRun] = {}
        self._runtime = _Runtime(self._model, self._host, chosen, self._options, strategy,
                                 self.tracer, max_tensor_bytes, device_graphs,
                                 self._threads.threads, self._sess_options.share_prepacked,
                                 frees_constants=parsed_here)
        self._pins = pins
        self._feeds = FeedChecker(self._model, max_tensor_bytes)
        placement = self._runtime.place(self._model.graph, pins)
        self._use_plan(*self._runtime.plan(self._model.graph, placement))
        # a kernel that failed to build moved its node: the plan's placement is the one that runs
        self.placement: Placement = self._plan.placement

    def _use_plan(self, plan: Plan, run: PlanRun) -> None:
        """Run ``plan`` from now on: its runner, its BLAS limit and its one-function path."""
        self._plan, self._run = plan, run
        self._run_threads = self._threads_for(plan, run)
        self._fast = self._fast_runner()

    def _fast_runner(self) -> Any:
        """The one-function path of plain runs (``feeds.plain_runner``), or ``None``."""
        if not self._plain_runs or self.tracer is not None:
            return None
        return plain_runner(self._feeds, self._run, self._run_threads, hand_out)

    def _threads_for(self, plan: Plan, run: PlanRun) -> BlasThreads:
        """The BLAS limit runs of ``plan`` take: none where no kernel of it calls BLAS
        (``Kernel.uses_blas``), where every value it makes is small enough that OpenBLAS runs
        each call on one thread anyway (``blas_stays_single``), or where ``run`` holds the
        limit itself once a value is big enough (``PlanRun.holds_blas``)."""
        if not self._threads.threads:
            return self._threads
        if run.holds_blas or all(step.kind == "node" and not step.kernel.uses_blas
                                 for step in plan.steps):
            return NO_LIMIT
        if self._feeds.plain is None:
            return self._threads
        shapes = [shape for _, _, shape in self._feeds.plain]
        for step in plan.steps:
            live = sum(s >= 0 for s in step.outputs)
            if (step.kind != "node" or len(step.expect) < live
                    or any(n.subgraphs for n in step.nodes)):
                return self._threads
            shapes.extend(expect[1] for expect in step.expect)
        shapes.extend(getattr(c, "shape", None) for c in plan.constants.values())
        return NO_LIMIT if blas_stays_single(shapes) else self._threads

    @property
    def _steps(self) -> tuple[Step, ...]:
        return self._plan.steps

    @property
    def prepacked(self) -> list[PrepackedUse]:
        """With ``share_prepacked``: each state a kernel offered, and whether it adopted one."""
        return list(self._plan.prepacked)

    @property
    def released_weights(self) -> list[tuple[str, int]]:
        """(name, bytes) of each weight whose memory was given back once every kernel reading
        it had packed it (``Kernel.released``; see :mod:`ep_host.released`)."""
        return list(self._plan.released)

    @property
    def device_graphs(self) -> list[PartitionCapture]:
        """Each device partition whose provider asked for device graphs
        (``provider_options={"cuda": {"enable_device_graph": True}}``): recorded, or why not."""
        return list(self._plan.device_graphs)

    def end_profiling(self) -> str | None:
        """Write the trace (Chrome trace-event JSON, opens in Perfetto) to the ``trace`` path
        given at creation (or the one ``SessionOptions.enable_profiling`` chose) and return the
        path; ``None`` when the session is not tracing to a file."""
        if self.tracer is None or self._trace_path is None:
            return None
        self.tracer.write(self._trace_path)
        return self._trace_path

    # -- onnxruntime's API ------------------------------------------------------------------

    def _declared_types(self, values: Any) -> dict[str, Any]:
        return {v.name: v.type for v in values if v.type.WhichOneof("value")}

    def get_inputs(self) -> list[NodeArg]:
        declared = self._declared_types(self._model.proto.graph.input)
        return [node_arg(v, declared.get(v.name)) for v in self._model.graph.inputs]

    def get_outputs(self) -> list[NodeArg]:
        declared = self._declared_types(self._model.proto.graph.output)
        return [node_arg(v, declared.get(v.name)) for v in self._model.graph.outputs]

    def get_providers(self) -> ProviderNames:
        """The providers this session uses that are available (ep-host names; ``in`` also
        accepts onnxruntime's, such as ``"CPUExecutionProvider"``)."""
        records = self._host.records
        return ProviderNames([p for p in self.placement.providers if records[p].available],
                             alias_map(self._host))

    def get_provider_options(self) -> dict[str, dict[str, Any]]:
        """Each provider in use -> the options it was given."""
        return {p: dict(self._options.get(p, {})) for p in self.get_providers()}

    def get_session_options(self) -> SessionOptions:
        """The session's options: those given (a copy), with the threads it runs with."""
        return self._sess_options.copy()

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata, as onnxruntime's ``ModelMetadata``."""
        return model_metadata(self._model.proto)

    def devices(self) -> list[Device]:
        """The devices of the providers this session uses, the host first."""
        found = {HOST.name: HOST}
        for provider in self.get_providers():
            device = self._runtime.device(provider)
            found.setdefault(device.name, device)
        return list(found.values())

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, binding: IOBinding, run_options: Any = None) -> None:
        """Run with ``binding``'s inputs; its outputs are then ``binding.get_outputs()``."""
        targets = binding.outputs
        if not targets:
            raise InputError(f"{self._model.label}: run_with_iobinding needs at least one output "
                             "bound (bind_output)")
        wanted = {name: t.device if isinstance(t, OrtValue) else t for name, t in targets.items()}
        results = self._run_values(binding.inputs, wanted, run_options)
        for name, target in targets.items():
            if isinstance(target, OrtValue):
                write_into(self._model.label, name, target, results[name])
                results[name] = target
        binding.set_results([results[name] for name in targets])

    def run_with_ort_values(self, output_names: Sequence[str] | None,
                            input_dict_ort_values: Mapping[str, OrtValue],
                            run_options: Any = None) -> list[OrtValue]:
        """Run with :class:`OrtValue` inputs; each output is an :class:`OrtValue` left on the
        device of the provider that computed it."""
        names = list(output_names) if output_names else list(self._plan.output_names)
        results = self._run_values(dict(input_dict_ort_values), dict.fromkeys(names), run_options)
        return [results[name] for name in names]

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
        while True:
            try:
                if run_options is None and not output_names and self._fast is not None:
                    outputs = self._fast(input_feed)
                    if outputs is not None:
                        return outputs
                names = self._output_names(output_names)
                feeds = self._feeds.check(input_feed)
                if run_options is None and self._plain_runs:
                    return hand_out(self._run_plan(self._run, feeds, names, None, None))
                return hand_out(self._execute(self._run, feeds, names, run_options))
            except KernelError as exc:
                if not self._place_without_lost(exc):
                    raise
            except MemoryError as exc:  # in the one-function path; ``_run_plan`` says it else
                model = self._model
                raise out_of_memory(exc, "a run", model.label, len(model.graph.nodes)) from exc

    def _place_without_lost(self, exc: KernelError) -> bool:
        """After an isolated provider's worker was lost in a run: place the model again without
        it (with a warning) and say ``True``, to run again; ``False`` where that cannot help."""
        lost = lost_provider(exc)
        if lost is None or self._host.strict:
            return False
        placement = self._runtime.place(self._model.graph, self._pins)
        if any(n.provider == lost.provider for n in placement.nodes):
            return False
        self._use_plan(*self._runtime.plan(self._model.graph, placement))
        self.placement, self._device_plans = self._plan.placement, {}
        self._runtime.checks.warnings.append(f"{lost}; the model was placed again without it")
        return True

    def _output_names(self, output_names: Sequence[str] | None) -> list[str]:
        plan = self._plan
        if not output_names:
            return plan.output_names
        names = list(output_names)
        unknown = [n for n in names if n not in plan.output_slots]
        if unknown:
            raise InputError(
                f"{self._model.label}: unknown output(s) {', '.join(map(repr, unknown))}; "
                f"the model's outputs are {', '.join(map(repr, plan.output_names))}"
            )
        return names

    def _execute(self, runner: PlanRun, feeds: dict[str, Any], names: list[str],
                 run_options: Any) -> list[Any]:
        cancel = run_options if getattr(run_options, "terminate", None) is not None else None
        timeout = getattr(run_options, "timeout_s", None) or self._run_timeout
        limit = self._runtime.max_tensor_bytes
        limited = MAX_TENSOR_BYTES.set(limit) if limit is not None else None
        try:
            return self._run_plan(runner, feeds, names, cancel, timeout)
        finally:
            if limited is not None:
                MAX_TENSOR_BYTES.reset(limited)

    def _run_values(self, inputs: Mapping[str, Any], wanted: Mapping[str, Device | None],
                    run_options: Any) -> dict[str, OrtValue]:
        """Run with :class:`OrtValue` (or host array) inputs; each output in ``wanted`` comes
        back on its device (``None``: the device of the provider that computed it)."""
        names = self._output_names(list(wanted))
        on_device = {n: v.device for n, v in inputs.items()
                     if isinstance(v, OrtValue) and not v.device.is_host}
        feeds = self._check_inputs(
            {n: v.value if isinstance(v, OrtValue) else v for n, v in inputs.items()},
            on_device)
        key = (tuple(sorted((n, d.name) for n, d in on_device.items())),
               tuple((n, None if wanted[n] is None else wanted[n].name) for n in names))
        if key not in self._device_plans:
            plan, where = device_plan(self._plan, on_device, {n: wanted[n] for n in names})
            runner = self._run if plan is self._plan else PlanRun(
                plan, self._runtime.checks, self._run.tracer, self._runtime.threads)
            self._device_plans[key] = (runner, where)
        runner, where = self._device_plans[key]
        values = self._execute(runner, feeds, names, run_options)
        held = [*feeds.values(), *runner.plan.constants.values()]
        results = {n: OrtValue(v.copy() if any(v is h for h in held) else v, where[n])
                   for n, v in zip(names, values, strict=True) if not where[n].is_host}
        host_names = [n for n in names if where[n].is_host]
        host_values = [v for n, v in zip(names, values, strict=True) if where[n].is_host]
        del values
        results.update(zip(host_names, map(OrtValue, hand_out(host_values)), strict=True))
        return results

    def _run_plan(self, runner: PlanRun, feeds: dict[str, Any], names: list[str], cancel: Any,
                  timeout: float | None) -> list[Any]:
        model = self._model
        try:
            threads = (self._run_threads if runner is self._run  # a device plan: as it holds
                       else NO_LIMIT if runner.holds_blas else self._threads)
            with threads:
                if timeout:
                    outputs = self._run_with_timeout(runner, feeds, names, cancel, timeout)
                elif self.tracer is None:
                    outputs = runner.run(feeds, names=names, cancel=cancel)
                else:
                    with self.tracer.span("run", "session", model=self._model.label):
                        outputs = runner.run(feeds, names=names, cancel=cancel)
        except MemoryError as exc:
            raise out_of_memory(exc, "a run", model.label, len(model.graph.nodes)) from exc
        return outputs

    def _run_with_timeout(self, runner: PlanRun, feeds: dict[str, Any], names: list[str],
                          cancel: Any, timeout: float) -> list[Any]:
        """The run on a worker thread, waited for ``timeout`` seconds; then it is told to stop
        at its next step and abandoned (see :class:`RunOptions`)."""
        token = RunToken(cancel)
        done = threading.Event()
        result: dict[str, Any] = {}
        context = contextvars.copy_context()

        def work() -> None:
            try:
                if self.tracer is None:
                    result["outputs"] = context.run(runner.run, feeds, names=names,
                                                    cancel=token)
                else:
                    with self.tracer.span("run", "session", model=self._model.label):
                        result["outputs"] = context.run(runner.run, feeds, names=names,
                                                        cancel=token)
            except BaseException as exc:  # handed to the caller, whatever it is
                result["error"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=work, name="ep-host-run", daemon=True)
        worker.start()
        if not done.wait(timeout):
            token.expired = True
            running = f" while {token.at} was running" if token.at else ""
            raise RunCancelledError(
                f"{self._model.label}: the run did not finish within {timeout:g} s "
                f"(RunOptions.timeout_s / EP_HOST_RUN_TIMEOUT) and was abandoned{running}; "
                "its thread stops at the next step, a step that never returns keeps it")
        if "error" in result:
            raise result.pop("error")
        return result.pop("outputs")

    def _check_inputs(self, feed: Mapping[str, Any],
                      on_device: Mapping[str, Device] | None = None) -> dict[str, Any]:
        """The feeds checked against the model's inputs (``ep_host.feeds``)."""
        return self._feeds.check(feed, on_device)


NO_LIMIT = BlasThreads(0)  # runs of a plan whose BLAS calls stay on one thread anyway
